"""The rules every proposed change to structured memory passes, whoever proposes it: the server's
updater (an LLM reading the conversation) or the host model (facts and profile sent with add_memory).

One set of rules for both, so that a fact is kept, deduplicated, superseded or trimmed the same
way whatever wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints, ValidationError

from memory_mcp.base.clock import utc_now
from memory_mcp.base.model import Model
from memory_mcp.base.settings import Settings
from memory_mcp.memory.facts import cap, current, keep_most_confident, new_fact_id, new_knowledge_id, normalise, retire
from memory_mcp.models import (
    HISTORY_SECTION_NAMES,
    USER_SECTION_NAMES,
    Fact,
    HostFact,
    KnowledgeEntry,
    MemoryDocument,
    ProposedFact,
    Section,
    SkippedFact,
    SupersededFact,
)

# Uploads belong to one session and will not exist later. "Upload" is about files whatever follows
# it; "attach" only with a file-like word near it (one can be attached to a dog).
_UPLOAD = re.compile(
    r"\bupload(?:ed|s|ing)?\b|上传|附件|"
    r"\battach(?:ed|es|ing|ment|ments)?\b[^.!?。！？]*(?:\bfiles?\b|\bdocuments?\b|\bpdf\b|\.[a-z0-9]{2,5}\b)|"
    r"(?:\bfiles?\b|\bdocuments?\b)[^.!?。！？]*\battach(?:ed|ment|ments)?\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?。！？]+[.!?。！？]*\s*")


class UpdateRejected(ValueError):
    """The proposal as a whole breaks a rule; nothing of it may be applied."""


class SectionUpdate(Model):
    model_config = ConfigDict(extra="ignore")

    summary: str = ""
    shouldUpdate: bool = False


class ProposedKnowledge(Model):
    model_config = ConfigDict(extra="ignore")

    content: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    confidence: float = Field(0.8, ge=0, le=1)


class SessionTopic(Model):
    model_config = ConfigDict(extra="ignore")

    summary: str = Field("", max_length=1000)
    keywords: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]] = Field(
        default_factory=list, max_length=8
    )


class UpdateProposal(Model):
    """A proposed change to one scope's memory. Facts stay raw here: each is validated on its
    own when applied, so one malformed fact from an LLM does not cost the others."""

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
    facts_added: list[Fact] = field(default_factory=list)
    facts_removed: list[str] = field(default_factory=list)
    facts_skipped: list[SkippedFact] = field(default_factory=list)
    facts_superseded: list[SupersededFact] = field(default_factory=list)
    sections_updated: list[str] = field(default_factory=list)
    knowledge_added: list[str] = field(default_factory=list)
    pages_set_aside: int = 0
    errors: list[str] = field(default_factory=list)

    def merge(self, other: UpdateReport) -> None:
        self.pages_analysed += other.pages_analysed
        self.llm_calls += other.llm_calls
        self.facts_added += other.facts_added
        self.facts_removed += other.facts_removed
        self.facts_skipped += other.facts_skipped
        self.facts_superseded += other.facts_superseded
        self.sections_updated += [name for name in other.sections_updated if name not in self.sections_updated]
        self.knowledge_added += other.knowledge_added
        self.pages_set_aside += other.pages_set_aside
        self.errors += other.errors


def apply_proposal(
    document: MemoryDocument,
    proposal: UpdateProposal,
    settings: Settings,
    source: str,
    removable: set[str] | None = None,
) -> tuple[MemoryDocument, UpdateReport]:
    """The document after the proposal, by the rules; raises UpdateRejected when it must be
    rejected whole. Only facts in `removable` (None: any) may be removed or replaced: the ids an
    LLM was shown, so that it cannot retire a fact it never saw."""
    report = UpdateReport()
    now = utc_now()
    proposed, malformed = _valid_facts(proposal.newFacts)
    holding = current(document.facts)
    # A pinned fact changes only when someone edits or deletes it by name (update_fact, delete_fact).
    retirable = {fact.id for fact in holding if not fact.pinned and (removable is None or fact.id in removable)}
    removing = set(proposal.factsToRemove) & retirable
    replacing = {fact.replaces for _, fact in proposed if fact.replaces is not None and fact.replaces in retirable}
    if malformed and (removing or replacing):
        # Removals paired with a fact we cannot read are likely a replacement gone wrong:
        # applying only the removal would turn a correction into a loss.
        raise UpdateRejected("it removes facts while one of its new facts is malformed")
    _check_removals(len(removing | replacing), settings, "retires")
    user = _apply_sections(document.user, USER_SECTION_NAMES, proposal.user, now, report, "user")
    history = _apply_sections(document.history, HISTORY_SECTION_NAMES, proposal.history, now, report, "history")

    seen = {normalise(fact.content) for fact in holding if fact.id not in removing | replacing}
    added, proposed_at, superseded_by = _admit_new_facts(proposed, seen, replacing, settings, source, now, report)

    # Removed facts are retired, not erased; when exactly one fact is added beside them, they
    # were replaced by it. A fact named by `replaces` is superseded by the fact that named it.
    only_added = added[0].id if len(added) == 1 else None
    facts = retire(document.facts, removing - superseded_by.keys(), now, only_added)
    for old, new in superseded_by.items():
        facts = retire(facts, {old}, now, new)
    retired_now = removing | superseded_by.keys()
    facts_kept = cap([*facts, *added], settings.memory.max_facts, now)
    kept_ids = {fact.id for fact in current(facts_kept)}
    # New facts too weak to make the cut were never memory: they leave no history behind.
    added_ids = {fact.id for fact in added}
    facts_kept = [fact for fact in facts_kept if fact.id not in added_ids or fact.id in kept_ids]
    pushed_out = [fact for fact in holding if fact.id not in retired_now and fact.id not in kept_ids]
    # Crowding stored facts out with new ones is a removal too, and counts against the cap.
    _check_removals(len(retired_now) + len(pushed_out), settings, "would retire (removed or pushed out by max_facts)")

    for fact in added:
        if fact.id not in kept_ids:
            report.facts_skipped.append(
                SkippedFact(index=proposed_at[fact.id], content=fact.content, reason="over_max_facts")
            )
    report.facts_added = [fact for fact in added if fact.id in kept_ids]
    gone = retired_now | {fact.id for fact in pushed_out}
    report.facts_removed = [fact.content for fact in holding if fact.id in gone]
    report.facts_superseded = [
        SupersededFact(id=old, superseded_by=new) for old, new in superseded_by.items() if new in kept_ids
    ]
    knowledge = _apply_knowledge(
        document.assistantKnowledge, proposal.assistantKnowledge, source, now, settings, report
    )
    updated = document.model_copy(
        update={"user": user, "history": history, "facts": facts_kept, "assistantKnowledge": knowledge}
    )
    return updated, report


def _admit_new_facts(
    proposed: list[tuple[int, ProposedFact]],
    seen: set[str],
    replacing: set[str],
    settings: Settings,
    source: str,
    now: str,
    report: UpdateReport,
) -> tuple[list[Fact], dict[str, int], dict[str, str]]:
    """The proposed facts that are admitted, as facts; where each was among the proposed; and which
    fact each replaced one is superseded by. The others are reported skipped, with why."""
    added: list[Fact] = []
    proposed_at: dict[str, int] = {}  # fact id -> its position among the proposed facts
    superseded_by: dict[str, str] = {}
    for index, candidate in proposed:
        key = normalise(candidate.content)
        reason = (
            "below_threshold"
            if candidate.confidence < settings.memory.fact_confidence_threshold
            else "duplicate"
            if key in seen
            else "upload_mention"
            if _UPLOAD.search(key)
            else None
        )
        if reason is not None:
            report.facts_skipped.append(SkippedFact(index=index, content=candidate.content, reason=reason))
            continue
        seen.add(key)
        fact = Fact(
            id=new_fact_id(),
            content=candidate.content,
            category=candidate.category,
            confidence=candidate.confidence,
            createdAt=now,
            source=source or "unknown",
            sourceError=candidate.sourceError if candidate.category == "correction" else None,
            # Only the host may pin or give an end (HostFact); the updater's facts are plain.
            pinned=isinstance(candidate, HostFact) and candidate.pinned,
            expiresAt=candidate.expiresAt if isinstance(candidate, HostFact) else None,
        )
        added.append(fact)
        proposed_at[fact.id] = index
        if (
            candidate.replaces is not None
            and candidate.replaces in replacing
            and candidate.replaces not in superseded_by
        ):
            superseded_by[candidate.replaces] = fact.id
    return added, proposed_at, superseded_by


def strip_upload_mentions(summary: str) -> str:
    """Drop the sentences that talk about uploaded or attached files: uploads belong to one
    session and will not exist later."""
    sentences = _SENTENCE.findall(summary.strip())
    return "".join(sentence for sentence in sentences if not _UPLOAD.search(sentence)).strip()


def _check_removals(count: int, settings: Settings, verb: str) -> None:
    # A model that lost the thread tends to "clean up" everything; one update is never
    # trusted with that much (memory.max_fact_removals).
    if count > settings.memory.max_fact_removals:
        raise UpdateRejected(
            f"it {verb} {count} stored facts at once, more than memory.max_fact_removals "
            f"({settings.memory.max_fact_removals})"
        )


def _valid_facts(raw_facts: Iterable[Any]) -> tuple[list[tuple[int, ProposedFact]], bool]:
    """The proposed facts that are well formed, with their positions; and whether any was not.
    Keys a fact does not have are ignored (models add ids and notes of their own)."""
    facts, malformed = [], False
    for index, raw in enumerate(raw_facts):
        if isinstance(raw, dict):
            raw = {key: value for key, value in raw.items() if key in ProposedFact.model_fields}
        try:
            facts.append((index, ProposedFact.model_validate(raw)))
        except ValidationError:
            malformed = True
    return facts, malformed


def _apply_sections(
    sections: Any,
    names: tuple[str, ...],
    updates: dict[str, SectionUpdate],
    now: str,
    report: UpdateReport,
    group: str,
) -> Any:
    sections = sections.model_copy(deep=True)
    for name in names:
        update = updates.get(name)
        if update is None or not update.shouldUpdate:
            continue
        summary = strip_upload_mentions(update.summary)
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
                id=new_knowledge_id(),
                content=proposed.content,
                confidence=proposed.confidence,
                createdAt=now,
                source=source or "unknown",
            )
        )
    kept = keep_most_confident(entries, settings.long_term_knowledge_capacity)
    existing_ids = {entry.id for entry in existing}
    report.knowledge_added = [entry.content for entry in kept if entry.id not in existing_ids]
    return kept
